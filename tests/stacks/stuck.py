# A process that waits in stuck_here() until its stdin is closed, with a second thread asleep: the
# target of tests/stacks/process_test.cpp.
import sys
import threading
import time


def background():
    while True:
        time.sleep(100)


def stuck_here():
    return sys.stdin.read()  # the line the tests look for


def main():
    threading.Thread(target=background, name="helper", daemon=True).start()
    print("ready", flush=True)
    stuck_here()


main()
