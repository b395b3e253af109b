"""`python -m agentrewind`: the same as the `agentrewind` command."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while starting: as quiet as during a command
    sys.exit(130)

sys.exit(main())
