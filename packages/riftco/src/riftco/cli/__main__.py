import sys

from riftco.cli import main

sys.exit(main())
