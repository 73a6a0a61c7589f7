"""The `weightcast` console command of an installed package: the package's own executable."""

import os
import sys


def main():
    from . import weightcast_binary

    binary = weightcast_binary()
    os.execv(binary, [binary, *sys.argv[1:]])
