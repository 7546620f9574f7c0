"""Writes the C++ block marked <!-- readme-snippet: ... --> in a Markdown file to a .cpp file.

Usage: extract_snippet.py README.md OUT.cpp
"""
import re
import sys


def main():
    source, out = sys.argv[1], sys.argv[2]
    text = open(source).read()
    m = re.search(r"^<!--\s*readme-snippet:.*?-->\n```cpp\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit(f"extract_snippet: {source} has no ```cpp block after <!-- readme-snippet: ... -->")
    code = f"// Generated from {source} by tests/docs/extract_snippet.py; edit the README.\n" + m[1]
    try:
        if open(out).read() == code:
            return  # unchanged: no rebuild
    except OSError:
        pass
    with open(out, "w") as f:
        f.write(code)


if __name__ == "__main__":
    main()
