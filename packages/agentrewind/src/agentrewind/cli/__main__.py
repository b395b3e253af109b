"""`python -m agentrewind.cli`: the same as the `agentrewind` command."""

import sys

try:
    from .main import main
except KeyboardInterrupt:  # Ctrl-C while starting: as quiet as during a command
    sys.exit(130)

sys.exit(main())
