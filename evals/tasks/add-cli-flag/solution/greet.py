import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description="Greet someone.")
    parser.add_argument("name")
    parser.add_argument("--shout", action="store_true", help="print in upper case")
    args = parser.parse_args()
    text = f"Hello, {args.name}!"
    print(text.upper() if args.shout else text)


if __name__ == "__main__":
    main()
