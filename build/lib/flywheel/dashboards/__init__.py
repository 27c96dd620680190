"""Charts (pure plotly figure builders) and their views."""
