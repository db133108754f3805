"""``python -m benchmarks``: the whole suite (see benchmarks/suite.py);
``python -m benchmarks torch_ops ...``: the PyTorch operators (benchmarks/torch_ops.py);
``python -m benchmarks lower_times ...``: ``pt.lower`` of every template (lower_times.py);
``python -m benchmarks mixed ...``: int8/bfloat16 matmul against torch and the dot
instructions' peaks (mixed.py)."""

import sys

if sys.argv[1:2] == ["torch_ops"]:
    from benchmarks.torch_ops import main

    main(sys.argv[2:])
elif sys.argv[1:2] == ["mixed"]:
    from benchmarks.mixed import main

    main(sys.argv[2:])
elif sys.argv[1:2] == ["lower_times"]:
    from benchmarks.lower_times import main

    main(sys.argv[2:])
else:
    from benchmarks.suite import main

    main()
