import sys

from stepwatch.collector.cli import main

sys.exit(main())
