import re
from pathlib import Path

from tool import parser

documented = set(re.findall(r"--[a-z][a-z-]*", Path("README.md").read_text()))
actual = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
actual.discard("--help")
assert documented == actual, f"README documents {sorted(documented)}, tool.py has {sorted(actual)}"
print("docs: ok")
