"""The default settings and voice catalogue: data only, installed as the package ``ttsfarm_configs``."""
