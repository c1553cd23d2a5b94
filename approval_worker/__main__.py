import sys

from approval_worker.cli import main

sys.exit(main())
