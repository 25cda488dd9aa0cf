from turngate.cli import main

main()
