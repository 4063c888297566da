from recruiter.cli import main

main()
