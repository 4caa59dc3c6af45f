"""Megatron-core's own checkpoint formats: `torch_dist` distributed checkpoints and legacy
`mp_rank_NN[_PPP]/model_optim_rng.pt` files, read from metadata and written on CPU."""
