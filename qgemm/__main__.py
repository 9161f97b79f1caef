"""`python -m qgemm` is the `qgemm` command."""
import sys

from cutlass_gen.cli import main

sys.exit(main())
