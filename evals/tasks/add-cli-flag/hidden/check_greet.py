import subprocess
import sys


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, "greet.py", *args], capture_output=True, text=True)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


assert run("bob") == "Hello, bob!\n", run("bob")
assert run("--shout", "bob") == "HELLO, BOB!\n", run("--shout", "bob")
assert run("ann", "--shout") == "HELLO, ANN!\n"
print("greet: ok")
