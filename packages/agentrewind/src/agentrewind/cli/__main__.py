"""`python -m agentrewind.cli`: the same as the `agentrewind` command."""

import sys

from .main import main

sys.exit(main())
