import csv
import sys


def average(rows):
    # The mean of the score column.
    return sum(r["score"] for r in rows) / len(rows)


def main(path):
    rows = list(csv.DictReader(open(path, newline="")))  # noqa: SIM115
    print(f"average: {average(rows):.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
