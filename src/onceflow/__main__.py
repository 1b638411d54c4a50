# PYTHON_ARGCOMPLETE_OK
from .cli import main

raise SystemExit(main())
