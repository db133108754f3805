"""``python -m benchmarks``: the whole suite (see benchmarks/suite.py);
``python -m benchmarks torch_ops ...``: the PyTorch operators (benchmarks/torch_ops.py);
``python -m benchmarks lower_times ...``: ``pt.lower`` of every template (lower_times.py)."""

import sys

if sys.argv[1:2] == ["torch_ops"]:
    from benchmarks.torch_ops import main

    main(sys.argv[2:])
elif sys.argv[1:2] == ["lower_times"]:
    from benchmarks.lower_times import main

    main(sys.argv[2:])
else:
    from benchmarks.suite import main

    main()
