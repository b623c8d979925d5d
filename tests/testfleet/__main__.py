"""`python3 -m tests.testfleet COMMAND` (what scripts/testfleet runs)."""

import sys

from tests.testfleet.cli import main

try:
    sys.exit(main())
except BrokenPipeError:  # `testfleet status | head`
    sys.exit(1)
