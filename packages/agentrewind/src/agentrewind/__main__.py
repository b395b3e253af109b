"""`python -m agentrewind`: the same as the `agentrewind` command."""

import sys

from .cli import main

sys.exit(main())
