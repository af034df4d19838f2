"""Predictor (PyTorch ANN): P_l, P_d and throughput from configuration and network; KPI gamma."""
