from cuset_core.cli import main

main()
