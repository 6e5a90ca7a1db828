import csv
import sys


def average(rows):
    # The mean of the score column (csv gives strings: convert them).
    return sum(float(r["score"]) for r in rows) / len(rows)


def main(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    print(f"average: {average(rows):.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
