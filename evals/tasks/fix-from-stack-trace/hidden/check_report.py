import subprocess
import sys

from report import average

assert average([{"score": "1"}, {"score": "2.5"}]) == 1.75
with open("more.csv", "w") as f:
    f.write("name,score\nx,10\ny,0\n")
for path, expected in [("data.csv", "average: 4.50\n"), ("more.csv", "average: 5.00\n")]:
    done = subprocess.run([sys.executable, "report.py", path], capture_output=True, text=True)
    assert done.stdout == expected, (path, done.stdout, done.stderr)
print("report: ok")
