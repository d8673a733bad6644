from captioner.cli import main

main()
