from hooklint.safe_path import drop_working_folder

drop_working_folder()

from hooklint.cli import main  # noqa: E402 - after the working folder left sys.path

raise SystemExit(main())
