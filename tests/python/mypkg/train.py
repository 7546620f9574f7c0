"""Run as a module (-m mypkg.train): prints its rank and arguments in one write."""
import os
import sys

sys.stdout.write(f"module rank={os.environ['RANK']} args={sys.argv[1:]}\n")
