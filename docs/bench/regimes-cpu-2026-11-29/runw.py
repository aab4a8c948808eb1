import sys
root = sys.argv.pop(1)
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, root)
import ggufspec
assert ggufspec.__file__.startswith(root), ggufspec.__file__
from ggufspec.cli import main
sys.argv[0] = "ggufspec"
sys.exit(main())
