import pathlib
import subprocess
import sys

sources = [p for p in pathlib.Path(".").rglob("*.py") if p.name != "check_rename.py"]
left = [str(p) for p in sources if "calc_total" in p.read_text()]
assert not left, f"calc_total is still named in {left}"
from shop.cart import Cart  # noqa: E402
from shop.pricing import compute_total  # noqa: E402

assert compute_total([10.0, 5.0]) == 18.0
cart = Cart()
cart.add(2.5)
assert cart.total() == 3.0
done = subprocess.run([sys.executable, "main.py"], capture_output=True, text=True)
assert done.stdout == "18.0 1.0\n", (done.stdout, done.stderr)
print("rename: ok")
