from trialground.cli import main

main()
