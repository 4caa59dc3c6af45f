"""The incident catalog: real jobs on the three clients (plain gloo actors, verl's
RayWorkerGroup, Ray Train's TorchTrainer), each with one injected incident and the answer
rankscope should give, and healthy scenarios that must stay quiet. `rankscope demo --client`
runs one; `benchmarks/bench_incidents.py` scores them all."""
