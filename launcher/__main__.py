"""``python -m launcher``: see ``launcher.cli``."""

from launcher.cli import main_entry

if __name__ == "__main__":
    main_entry()
