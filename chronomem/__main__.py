"""`python -m chronomem` is the same as the `chronomem` console script."""

from chronomem.cli import main

raise SystemExit(main())
