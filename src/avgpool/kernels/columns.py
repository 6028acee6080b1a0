"""The columns of the integer tables the engine builds (:mod:`avgpool.tables`) and the kernels
read, named once here so that neither side spells a column by its number. numba reads these
module constants as compile-time values: a named column compiles to the same code as a number."""

# KernelTables.axes: one row per spatial axis
LENGTH = 0  # input values along the axis
OUTPUTS = 1  # windows along the axis
OFFSET = 2  # where the axis's windows start in the concatenated firsts, counts and scales
DILATION = 3
STRIDE = 4
BLOCK = 5  # the block size of the partial sums, 0 for direct taps
INNER_LO = 6  # the first output whose window lies wholly inside the input
INNER_HI = 7  # one past the last such output
PLANE_PAD = 8  # the axis's pad_begin where the small-plane kernel pools the slabs, else -1
FUSED = 9  # axis 0: 1 where the two passes of a channels-last plane run fused (tables.fuses_passes)
AXIS_COLUMNS = 10

# RunningPlan.passes: one row per running-sum pass, the contiguous axis of NCX first; the last
# four columns are 0 but for that axis
PASS_AXIS = 0
PASS_RUNS = 1  # runs per slab
PASS_INNER = 2  # values per row
PASS_PAD_BEGIN = 3
PASS_KERNEL = 4
PASS_LINE = 5  # the padded line's length
PASS_CLIPPED = 6  # 1: windows clipped to the input, summed from prefix sums in a line of 2 * length + 1
PASS_COLUMNS = 7
