from core.settings.docs import main

main()
