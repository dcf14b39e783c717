"""How units are stepped: lockstep batches (lerobot-eval's way) or continuous slots."""
