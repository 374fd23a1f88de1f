"""`fuseforge fuzz`: random, shape-valid KernelBench-style model files, and a campaign that optimizes each.

    builder.py      the model file being written: constants, __init__ and forward lines, the current value
    anchors.py      the first op: linear, matmul, bmm, conv1d/2d/3d, conv_transpose2d/3d with random sizes
    op.py           a chain op: name, category, when it is valid, how it writes itself
    ops_*.py        the chain ops (pointwise, operands, in-place and random, shape, norms and pools)
    vocabulary.py   every chain op by name, and the categories they are drawn from
    generator.py    generate(seed) -> one model file (the same seed always writes the same file)
    reasons.py      the one-line failure reason of an optimize run, the plans it left, keys for counting
    campaign.py     generate, optimize each in a subprocess with a timeout, record every outcome in fuzz.json
    cli.py          `fuseforge fuzz`
"""
