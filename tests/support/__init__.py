"""What the tests share; no test module imports from another test module.

* ``broker``: the broker as a child process (``BrokerProcess``), the settings tests start it
  with (``FAST_GROUPS``, ``SMALL_SEGMENTS``, ``SEGMENT_SHAPES``), and its data directory
  read directly (``partition_dir``, ``cleaned_through``);
* ``waiting``: ``wait_for``, the one way a test waits for a condition;
* ``kafka``: confluent-kafka (librdkafka) helpers: topics, producing, reading back,
  transactional producers;
* ``wire``: a bare Kafka protocol client (``WireClient``) and the requests tests build by hand;
* ``ctp``: the consume-transform-produce worker (``ctp_worker.py``) as a child process;
* ``tcp_proxy``: a proxy between real clients and a broker that holds a request back, or keeps a
  copy of it to deliver again (``RequestProxy``).
* ``cli``: ``onceflow`` commands run in the test's own process (``Run``), stdin given, stdout
  and stderr captured.

``tests/conftest.py`` holds the fixtures and has pytest rewrite the asserts in these modules.
"""

import atexit as _atexit
import shutil as _shutil
import tempfile as _tempfile

#: The one directory the session's helpers make their scratch directories in (checkpoints,
#: output paths, the Spark fault dir); removed when the test process exits.
SCRATCH = _tempfile.mkdtemp(prefix="onceflow-tests-")
_atexit.register(_shutil.rmtree, SCRATCH, True)
