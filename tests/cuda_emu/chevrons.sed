# The one source transformation of the CUDA emulation (README.md):
#   kernel<<<grid, block, shared, stream>>>(args)  ->  CUDA_EMU_LAUNCH(kernel, grid, block, shared, stream)(args)
# A launch's chevrons must stay on one line.
s/\b\([A-Za-z_][A-Za-z_0-9:]*\)<<<\(.*\)>>>(/CUDA_EMU_LAUNCH(\1, \2)(/
