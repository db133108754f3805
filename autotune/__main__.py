"""``python -m autotune`` is ``pypto-tune``."""

import sys

from .cli import main

sys.exit(main())
