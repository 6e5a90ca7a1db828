import argparse

parser = argparse.ArgumentParser(prog="tool")
parser.add_argument("--input", required=True, help="the file to read")
parser.add_argument("--limit", type=int, default=10, help="at most this many lines")
parser.add_argument("--reverse", action="store_true", help="newest first")

if __name__ == "__main__":
    print(parser.parse_args())
