"""``python -m rolloutlab`` = the ``rolloutlab`` console script (for machines where the
package is on PYTHONPATH but not installed, e.g. bench/gpu_validation.sh)."""

from rolloutlab.cli import main

main()
