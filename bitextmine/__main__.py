from bitextmine.cli import main

main()
