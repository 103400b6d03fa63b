"""``python -m sdlite`` = the ``sdlite`` command."""
import sys

from sdlite.cli import main

sys.exit(main())
