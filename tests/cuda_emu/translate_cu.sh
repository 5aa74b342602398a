#!/usr/bin/env sh
# translate_cu.sh KERNEL.cu OUT.cpp: the .cu file as C++ for the CUDA
# emulation (chevrons.sed); #line keeps compiler and sanitizer reports on the
# original .cu lines.
set -eu
{ printf '#line 1 "%s"\n' "$1"; sed -f "$(dirname "$0")/chevrons.sed" "$1"; } > "$2"
