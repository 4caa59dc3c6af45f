"""`rankscope doctor --config`: a verl-style trainer config linted, memory per GPU estimated."""
