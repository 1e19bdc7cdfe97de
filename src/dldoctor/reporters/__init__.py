"""One module per output format; each renders a report (findings and recorded series) only."""
