import sys

from rollbench.cli import main

sys.exit(main())
