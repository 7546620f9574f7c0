"""Writes the C++ block marked <!-- snippet: ... --> in a Markdown file to a .cpp file.

Usage: extract_snippet.py DOC.md OUT.cpp
"""
import re
import sys


def main():
    source, out = sys.argv[1], sys.argv[2]
    text = open(source).read()
    blocks = re.findall(r"^<!--\s*snippet:.*?-->\n```cpp\n(.*?)^```", text, re.S | re.M)
    if len(blocks) != 1:
        sys.exit(f"extract_snippet: {source} has {len(blocks)} ```cpp blocks after "
                 "<!-- snippet: ... -->; it must have exactly one")
    code = f"// Generated from {source} by tests/docs/extract_snippet.py; edit the document.\n" + blocks[0]
    try:
        if open(out).read() == code:
            return  # unchanged: no rebuild
    except OSError:
        pass
    with open(out, "w") as f:
        f.write(code)


if __name__ == "__main__":
    main()
