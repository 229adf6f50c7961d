from hooklint.cli import main

raise SystemExit(main())
