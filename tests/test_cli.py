"""The command line (cli.py): every verb and option explains itself."""




def test_every_cli_verb_and_option_has_help():
    from xcbench.cli import parser
    p = parser()
    sub = next(a for a in p._actions if a.dest == "verb")
    for name, sp in sub.choices.items():
        assert sp.description or sub._choices_actions and any(c.dest == name and c.help for c in sub._choices_actions), name
        for a in sp._actions:
            if a.dest != "help":
                assert a.help, f"xcbench {name} {a.option_strings}: no help text"
