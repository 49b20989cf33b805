import sys

from dataflow_core.cli import main

sys.exit(main())
