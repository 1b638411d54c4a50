"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server's exchange and the credentials.

Theory of operation.  The broker never holds a password.  For each user and
mechanism it keeps what RFC 5802 (section 3) calls the server's credential:

    SaltedPassword = Hi(password, salt, iterations)       (PBKDF2 with HMAC-H)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

with the salt and the iteration count (Kafka's ``ScramFormatter`` and
``ScramCredential``).  AlterUserScramCredentials (KIP-554) brings the salt and
SaltedPassword, computed by the client; ``credential_from_salted_password``
turns them into the stored fields.  The exchange, two tokens each way:

    client-first  n,[a=authzid],n=<user>,r=<client nonce>[,extensions]
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 of the gs2 header>,r=<both nonces>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientSignature = HMAC(StoredKey, AuthMessage);  ClientKey = ClientProof XOR ClientSignature
    the client knew the password iff H(ClientKey) == StoredKey
    ServerSignature = HMAC(ServerKey, AuthMessage)   (proves the server holds the credential)

``ScramServer`` is the server's side, sans I/O: states RECEIVE_CLIENT_FIRST
-> RECEIVE_CLIENT_FINAL -> COMPLETE, and FAILED from either (Kafka's
``ScramSaslServer.State``).  What it accepts is Kafka's: the gs2 header must
be ``n`` (no channel binding: ``p=`` and ``y`` are refused, as Kafka's
``ClientFirstMessage`` pattern refuses them); a user name unescapes ``=2C``
and ``=3D`` and may hold no other ``=``; extensions are ignored except
``tokenauth=true``, a delegation token, which this broker has none of (so it
fails as Kafka's "Invalid tokenId" does); an unknown user fails at once, on
the first message (Kafka does not simulate an exchange for it).  Where Kafka
is laxer than RFC 5802, the RFC is followed, since a correct client passes
both: the channel binding ``c=`` must echo the gs2 header, the final nonce
must equal the server-first one (Kafka checks only its ending), a reserved
``m=`` fails (RFC 5802, section 5.1), and the AuthMessage is made of the
messages as received.  User names may be any UTF-8 (Kafka's pattern allows
only ASCII).  Every failure raises ``SaslAuthenticationFailed``: the
authzid mismatch with Kafka's own message, everything else behind Kafka's
generic "invalid credentials" text (``SaslAuthenticationFailed.invalid_credentials``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from .sasl import IllegalSaslState, SaslAuthenticationFailed


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, its KIP-554 wire code and its hash (Kafka's ScramMechanism)."""

    name: str
    #: AlterUserScramCredentials' and DescribeUserScramCredentials' ``mechanism`` (int8).
    code: int
    hash_name: str
    #: Kafka's bounds on iterations (ScramMechanism.minIterations; ScramControlManager.MAX_ITERATIONS).
    min_iterations: int = 4096
    max_iterations: int = 16384

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: tuple[ScramMechanism, ...] = (SCRAM_SHA_256, SCRAM_SHA_512)
BY_NAME = {m.name: m for m in MECHANISMS}
BY_CODE = {m.code: m for m in MECHANISMS}


# -- credentials (Kafka's ScramFormatter) -----------------------------------------


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker stores for one user and mechanism; never the password."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def salted_password(mechanism: ScramMechanism, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """``Hi(Normalize(password), salt, i)``: PBKDF2-HMAC (RFC 5802, section 2.2).  Normalize is
    UTF-8 without SASLprep, as Kafka's ``ScramFormatter.normalize``."""
    raw = password.encode("utf-8") if isinstance(password, str) else password
    return hashlib.pbkdf2_hmac(mechanism.hash_name, raw, salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Client Key")


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Server Key")


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored fields from what AlterUserScramCredentials carries (Kafka's ``ScramControlManager.finishUpsertion``)."""
    return ScramCredential(salt, mechanism.hash(client_key(mechanism, salted)), server_key(mechanism, salted), iterations)


def make_credential(mechanism: ScramMechanism, password: str | bytes, salt: bytes | None = None,
                    iterations: int = 4096) -> ScramCredential:
    """A credential from a password (a random 24-byte salt unless one is given)."""
    salt = secrets.token_bytes(24) if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def escape_username(user: str) -> str:
    """A user name as a SCRAM ``saslname``: ``=`` as ``=3D``, ``,`` as ``=2C`` (RFC 5802, section 5.1)."""
    return user.replace("=", "=3D").replace(",", "=2C")


def unescape_username(saslname: str) -> str | None:
    """The user name of a ``saslname``; None if it holds an ``=`` that is not ``=2C`` or ``=3D``."""
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        return None
    return saslname.replace("=2C", ",").replace("=3D", "=")


# -- the exchange -------------------------------------------------------------------

#: ``value-safe-char`` runs: no NUL, ``=`` or ``,`` (RFC 5802, section 7).
_SASLNAME = re.compile(r"(?:[^\x00=,]|=2C|=3D)+")
#: ``printable``: %x21-7E except ``,``.
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
#: An extension: Kafka's ``ALPHA=VALUE`` (``tokenauth=true``); RFC 5802's are one letter.
_EXTENSION = re.compile(r"([A-Za-z]+)=([^\x00,]+)")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
#: The only extension with a meaning here (Kafka's ScramLoginModule.TOKEN_AUTH_CONFIG).
TOKEN_AUTH = "tokenauth"


class State(Enum):
    """Kafka's ``ScramSaslServer.State``."""

    #: Waiting for client-first; -> RECEIVE_CLIENT_FINAL after server-first is returned, else -> FAILED.
    RECEIVE_CLIENT_FIRST = "RECEIVE_CLIENT_FIRST_MESSAGE"
    #: Waiting for client-final; -> COMPLETE after server-final is returned, else -> FAILED.
    RECEIVE_CLIENT_FINAL = "RECEIVE_CLIENT_FINAL_MESSAGE"
    #: Authenticated; any further token is refused (IllegalSaslState).
    COMPLETE = "COMPLETE"
    #: Refused; any further token is refused (IllegalSaslState).
    FAILED = "FAILED"


class _Invalid(Exception):
    """Inside the server only: a token that fails, with the reason to log."""


def _b64decode(text: str, what: str) -> bytes:
    if not _BASE64.fullmatch(text):
        raise _Invalid(f"{what} is not base64")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise _Invalid(f"{what} is not base64") from None


def _attribute(part: str, name: str, what: str) -> str:
    if not part.startswith(name + "="):
        raise _Invalid(f"Invalid SCRAM {what} message format: expected {name}=")
    return part[len(name) + 1:]


#: Finds the credential of a user name for this mechanism (None: no such user).
CredentialLookup = Callable[[str], ScramCredential | None]


class ScramServer:
    """One SCRAM exchange (``SaslServer``); ``lookup`` gives a user's credential for this mechanism.

    ``server_nonce`` is for tests (RFC 7677's example); by default 24 random bytes, URL-safe base64.
    """

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup, server_nonce: str | None = None) -> None:
        self.scram = mechanism
        self.mechanism = mechanism.name
        self._lookup = lookup
        self._server_nonce = server_nonce if server_nonce is not None else secrets.token_urlsafe(24)
        if not _NONCE.fullmatch(self._server_nonce):
            raise ValueError("a server nonce must be printable ASCII without commas")
        self.state = State.RECEIVE_CLIENT_FIRST
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = b""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def authorization_id(self) -> str:
        if self.state is not State.COMPLETE or self._user is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._user

    def evaluate(self, token: bytes) -> bytes:
        if self.state in (State.COMPLETE, State.FAILED):
            raise IllegalSaslState(f"Unexpected challenge in Sasl server state {self.state.value}")
        try:
            if self.state is State.RECEIVE_CLIENT_FIRST:
                reply = self._client_first(token)
                self.state = State.RECEIVE_CLIENT_FINAL
            else:
                reply = self._client_final(token)
                self.state = State.COMPLETE
            return reply
        except _Invalid as exc:
            self._fail()
            raise SaslAuthenticationFailed.invalid_credentials(self.mechanism, str(exc)) from None
        except SaslAuthenticationFailed:
            self._fail()
            raise

    def _fail(self) -> None:
        self.state = State.FAILED
        self._credential = None

    def _client_first(self, token: bytes) -> bytes:
        message = _text(token, "client first")
        # gs2-header = gs2-cbind-flag "," [authzid] ","; only "n" (Kafka's ClientFirstMessage).
        parts = message.split(",")
        if len(parts) < 4 or parts[0] != "n":
            raise _Invalid("Invalid SCRAM client first message format: the gs2 header must be n (no channel binding)")
        authzid = ""
        if parts[1]:
            saslname = _attribute(parts[1], "a", "client first")
            if not _SASLNAME.fullmatch(saslname) or (unescaped := unescape_username(saslname)) is None:
                raise _Invalid("Invalid SCRAM client first message format: bad authzid")
            authzid = unescaped
        self._gs2_header = f"{parts[0]},{parts[1]},".encode()
        bare = parts[2:]
        if bare[0].startswith("m="):
            raise _Invalid("Invalid SCRAM client first message format: reserved attribute m (RFC 5802, 5.1)")
        saslname = _attribute(bare[0], "n", "client first")
        nonce = _attribute(bare[1], "r", "client first")
        if not _SASLNAME.fullmatch(saslname) or (user := unescape_username(saslname)) is None:
            raise _Invalid("Invalid SCRAM client first message format: bad user name")
        if not _NONCE.fullmatch(nonce):
            raise _Invalid("Invalid SCRAM client first message format: bad nonce")
        extensions = {}
        for part in bare[2:]:
            if not (match := _EXTENSION.fullmatch(part)):
                raise _Invalid("Invalid SCRAM client first message format: bad extension")
            extensions[match[1]] = match[2]
        if extensions.get(TOKEN_AUTH, "").lower() == "true":
            raise _Invalid(f"Token Authentication failed: Invalid tokenId : {user} (no delegation tokens here)")
        credential = self._lookup(user)
        if credential is None:
            raise _Invalid(f"Authentication failed: Invalid user credentials (no {self.mechanism} credential for {user!r})")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < self.scram.min_iterations:
            raise _Invalid(f"Iterations {credential.iterations} is less than the minimum {self.scram.min_iterations} for {self.mechanism}")
        self._user, self._credential = user, credential
        self._client_first_bare = ",".join(bare)
        self._nonce = nonce + self._server_nonce
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _client_final(self, token: bytes) -> bytes:
        if self._credential is None:
            raise RuntimeError("SCRAM: client-final with no credential from client-first")  # a bug: states say otherwise
        message = _text(token, "client final")
        without_proof, sep, proof_part = message.rpartition(",")
        parts = without_proof.split(",")
        if not sep or len(parts) < 2:
            raise _Invalid("Invalid SCRAM client final message format")
        channel_binding = _b64decode(_attribute(parts[0], "c", "client final"), "channel binding")
        nonce = _attribute(parts[1], "r", "client final")
        for part in parts[2:]:
            if not _EXTENSION.fullmatch(part):
                raise _Invalid("Invalid SCRAM client final message format: bad extension")
        proof = _b64decode(_attribute(proof_part, "p", "client final"), "proof")
        if not hmac.compare_digest(channel_binding, self._gs2_header):
            raise _Invalid("Invalid channel binding in the final client message: it does not repeat the gs2 header")
        if not hmac.compare_digest(nonce.encode(), self._nonce.encode()):
            raise _Invalid("Invalid client nonce in the final client message.")
        if len(proof) != self.scram.digest_size:
            raise _Invalid("Invalid client credentials (a proof of the wrong length)")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = self.scram.hmac(self._credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self.scram.hash(client_key), self._credential.stored_key):
            raise _Invalid(f"Invalid client credentials (user {self._user!r})")
        signature = self.scram.hmac(self._credential.server_key, auth_message)
        self._credential = None
        return b"v=" + base64.b64encode(signature)


def _text(token: bytes, what: str) -> str:
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise _Invalid(f"Invalid SCRAM {what} message format: not UTF-8") from None
    if "\x00" in text:
        raise _Invalid(f"Invalid SCRAM {what} message format: a NUL character")
    return text
