"""The *held-out* wordings of ``foldgate eval memory``: what people say about themselves, and what they say that a
memory must not keep as theirs, written blind: without reading the memory notes' patterns, their tests, or the
tuned and dev wordings (checked afterwards for verbatim repeats of those, and none kept). Nobody develops the memory
against this set, and nobody reads its misses while developing: its figures are the honest estimate of how well
what people really type is kept. Once a developer tunes on it or sees its misses, it moves into the dev set
(:mod:`evals.dev_wordings`) and a new blind set is written here.

The phrasing is that of many people: texting in lower case with "im", "u", "pls" and emoji, an older person's
formal sentences, British, Irish and American turns of phrase, a few words of Spanish, Italian, German or French,
the statement in the middle of a long message about something else, corrections of something said before, and
messages saying several things at once (:data:`HELD_OUT_SEVERAL`). The shapes are those of
:mod:`evals.people_conversations`: a statement's core, what a memory entry should hold, is between ``[`` and ``]``;
``{x}`` is a value of the pool (``{X}`` capitalised), and a wording of ``{x}`` alone says its value as written.
Every core is something its speaker would expect the bot to remember about them; every distractor is something it
should not keep as theirs (another's, supposed, asked, a passing mood, quoted, hedged, or someone else's secret).
"""

from __future__ import annotations

# (kind, value pool, wordings with {x}, question), as in evals.people_conversations.STATEMENTS. No value is one of
# another pool's, a city of tests.fakes.everyday_words or a distractor's value: each core is said once per world.
HELD_OUT_STATEMENTS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "name",
        "Moss|Coco|Benji|Roo|Izzy|Ferg|Lulu|Teddy|Vee|Ozzie",
        (
            "hey, [call me {x} pls]",
            "[I'm {x}], by the way — we never did introductions!",
            "[My name's {x}].",
            "Nobody has used my full name since primary school, [I'm {x} to everyone].",
            "[You can call me {x}] from now on.",
            "ugh the app shows my legal name, [I actually go by {x}]",
            "[Please address me as {x}].",
            "[{x} is what my friends call me], use that.",
            "Correction: [my name is spelled {x}], not the way I typed it yesterday.",
            "ciao! [mi chiamo {x}], but English is fine",
            "[I'd like you to call me {x}], if that's all right.",
            "[Just call me {x}] — Mrs feels far too formal.",
            "[My nickname is {x}], use it!",
        ),
        "What name should you call me by?",
    ),
    (
        "constraint",
        "walnuts|strawberries|ibuprofen|wasp stings|mango|soy|aspirin|hazelnuts|mustard|celery",
        (
            "fyi [im allergic to {x}] so pls dont suggest anything with it",
            "[{X} gives me a terrible allergic reaction], learned that the hard way.",
            "Just back from the GP and it's official: [I have an allergy to {x}].",
            "[I carry an EpiPen for my {x} allergy].",
            "[I react badly to {x}], it's an allergy thing.",
            "Doc says [I'm allergic to {x}] — so no more of that for me 😩",
            "ojo — [I'm allergic to {x}], muy importante",
        ),
        "What am I allergic to?",
    ),
    (
        "constraint",
        "[I eat fish but no meat], pescatarian basically.|[I keep kosher]."
        "|[Dairy makes me ill], I'm lactose intolerant.|[I don't do caffeine] any more, doctor's orders."
        "|[I haven't touched alcohol in twelve years].|[I only eat halal]."
        "|[I'm on a low-sodium diet] for my blood pressure.|[I have to avoid gluten] for medical reasons.",
        ("{x}",),
        "What can't I eat or drink, what's my diet?",
    ),
    (
        "constraint",
        "[I can't drive], never got my licence.|[I'm colourblind], so colour-coded charts are useless to me."
        "|[I'm hard of hearing], so I'd rather read than get voice notes."
        "|[Stairs are a no-go for me] since my knee surgery.|[I get seasick], so boats are out."
        "|[I use a wheelchair], so check step-free access for me.",
        ("{x}",),
        "What can't I do, what should you keep in mind about me?",
    ),
    (
        "fact",
        "Galway|Tampere|Halifax|Dunedin|Tucson|Graz|Bergen|Ljubljana|Nantes|Hobart",
        (
            "[I live in {x} now], moved in March",
            "[we're in {x} now], just got the keys!",
            "Long week. Packing, the van, the cat hiding under the seat the whole drive... anyway [I'm living in {x} "
            "now] and the flat is tiny but I love it. What are you up to?",
            "[{X} is home now], still getting used to the rain.",
            "Sorry, I said Leeds the other day but that's where my brother is — [I actually live in {x}].",
            "[just moved to {x}] 🏡",
        ),
        "Where do I live now?",
    ),
    (
        "fact",
        "dentist|welder|bus driver|midwife|software tester|florist|primary school teacher|locksmith|vet|plumber",
        (
            "Twenty years in and [I'm still a {x}], can you believe it.",
            "Work was mad today — [I'm a {x}], so Fridays are always like this.",
            "[I've worked as a {x} since 2015].",
            "[I was a {x} for forty years] before I retired.",
            "[I'm training to be a {x}], second year now.",
        ),
        "What's my job?",
    ),
    (
        "fact",
        "Nell|Arlo|Maeve|Caspar|Tobias|Wren|Hugo|Elsie|Anouk|Ciaran",
        (
            "[My other half is called {x}].",
            "[my bf is called {x}] lol he says hi",
            "[Our little one is {x}], turning three next week.",
            "[My eldest is called {x}], fourteen going on forty.",
            "[{x} is my partner], and does all the cooking.",
            "[My dog is called {x}], a rescue from Spain.",
        ),
        "What's the name of my partner, my child or my pet?",
    ),
    (
        "fact",
        "January 8|February 21|May 17|August 4|the 29th of March|the 2nd of October|11 November|June 30",
        (
            "[bday's {x}] 🎂 dont forget",
            "[I turn forty on {x}], eek.",
            "Sorry, I gave you the wrong date before — [my birthday is actually {x}].",
            "[{X} is my birthday], if you want to plan ahead.",
        ),
        "When's my birthday?",
    ),
    (
        "preference",
        "rainy days|hiking|thrillers|Thai food|vinyl records|gardening|sea swimming|dark chocolate|sci-fi films",
        (
            "[im lowkey obsessed w {x}] ngl",
            "[{X} is my favourite thing].",
            "[I'm really into {x}], always have been.",
            "[nothing makes me happier than {x}]",
            "[I love {x}], me encanta",
            "Random, but [my favourite thing in the world is {x}].",
            "We spent the whole weekend at my in-laws, three kids, two dogs, no wifi, and you know what kept me "
            "sane? [I really enjoy {x}], so I snuck off for that. Back to normal now.",
        ),
        "What do I love?",
    ),
    (
        "preference",
        "reality TV|jazz fusion|pineapple on pizza|crowds|podcasts|marzipan|loud restaurants|liquorice|escape rooms",
        (
            "[I can't bear {x}].",
            "[I've no time for {x}].",
            "[I'm not into {x}], sorry.",
            "[i really dont like {x}] lol",
            "[I despise {x}], always have.",
            "[I have zero interest in {x}].",
        ),
        "What do I dislike?",
    ),
    (
        "preference",
        "window seats|early flights|paper books|phone calls over texts|showers over baths|mountains over beaches",
        ("[I always go for {x}].", "[I'd take {x} any day]."),
        "What do I prefer?",
    ),
    (
        "instruction",
        "in British English|with sources|in under 100 words|in French|with a summary first|without exclamation marks"
        "|in a numbered list|with times in 24-hour format",
        (
            "[pls always answer {x}]",
            "[Going forward, write to me {x}].",
            "[I need your answers {x}], thanks.",
            "Remember for next time: [answer me {x}].",
            "[Always respond {x}] — it's easier for me to read.",
            "Kindly [reply to me {x} from now on].",
            "bitte, [always answer me {x}] 🙏",
        ),
        "How did I ask you to answer me?",
    ),
    (
        "instruction",
        "[Never call me sweetie].|[Stop asking me follow-up questions at the end of every answer], it drives me mad."
        "|[Don't use my surname] when you address me.|[Remind me to drink water whenever I say I'm tired]."
        "|[Always double-check dates you give me].|[Don't mention my ex] ever again, please."
        "|[Skip the pleasantries and get straight to the answer].",
        ("{x}",),
        "What did I ask you to always or never do?",
    ),
    (
        "decision",
        "go back to uni|buy a house in the country|stop drinking|take a year off|learn Japanese|move back home"
        "|get a dog|start my own bakery|retire early|leave my job",
        (
            "[I'm going to {x}], decision made.",
            "After months of back and forth [I've made up my mind to {x}].",
            "[I've settled on it: I'll {x}] 🤞",
            "[I'm definitely going to {x}] next year, no more dithering.",
            "ok so it's official, [im gonna {x}] 🎉",
            "[It's final, I'll {x}].",
            "Change of plan — [I've decided to {x} after all].",
            "Ho deciso! [I'll {x}], no going back.",
            "So we talked it through over dinner, weighed up the money, the commute, my mum's health, all of it, "
            "and [I've decided I'll {x}], which feels huge. Anyway, how was your weekend?",
        ),
        "What have I decided to do?",
    ),
    (
        "decision",
        "[We're not having a big wedding], just the registry office.|[I've chosen the blue tiles for the kitchen]."
        "|[I've said no to the promotion].|[We're naming the baby Iris].|[I've decided against the surgery] for now.",
        ("{x}",),
        "What did I decide?",
    ),
)

# Messages that say several things at once, each core with its kind and question; one per person of a world.
HELD_OUT_SEVERAL: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "ok quick intro since we keep chatting: [I'm Sol], [I live in Reykjavik] and [I'm a ferry captain] 🙂",
        (
            ("name", "What name should you call me by?"),
            ("fact", "Where do I live now?"),
            ("fact", "What's my job?"),
        ),
    ),
    (
        "Two things for the record: [I'm allergic to almonds] and [please never suggest recipes with almonds in].",
        (("constraint", "What am I allergic to?"), ("instruction", "What did I ask you never to suggest?")),
    ),
    (
        "[We've decided to move to Lisbon] next summer, so [please answer me in Portuguese when you can] — practice!",
        (("decision", "What have I decided to do?"), ("instruction", "How did I ask you to answer me?")),
    ),
    (
        "Correction to what I told you last week: [I don't eat fish either now], and [my birthday's the 9th of "
        "May], not the 19th.",
        (("constraint", "What can't I eat?"), ("fact", "When's my birthday?")),
    ),
    (
        "lol ok so [i'm not a morning person], [i work nights at the bakery] and [i'm diabetic] so yeah my diet "
        "is weird",
        (
            ("preference", "What do I dislike?"),
            ("fact", "What's my job?"),
            ("constraint", "What can't I eat, what's my diet?"),
        ),
    ),
    (
        "Hallo! [My partner is called Anton], [we live in Freiburg], and [I can't stand techno].",
        (
            ("fact", "What's the name of my partner?"),
            ("fact", "Where do I live now?"),
            ("preference", "What do I dislike?"),
        ),
    ),
    (
        "Ugh, long day. The train was cancelled, then the replacement bus broke down outside Didcot, then I spilled "
        "coffee all over my notes. Anyway, [I've decided to learn to drive] and [please remind me to practise on "
        "Sundays].",
        (("decision", "What have I decided to do?"), ("instruction", "What did I ask you to remind me of?")),
    ),
    (
        "[Call me Bertie] — [I'm a retired headmaster] and [I'd like plain answers without any slang], please.",
        (
            ("name", "What name should you call me by?"),
            ("fact", "What's my job?"),
            ("instruction", "How did I ask you to answer me?"),
        ),
    ),
    (
        "For when you plan things for me: [I've been vegetarian since January], [I love spicy Korean food] and "
        "[I've never learned to drive].",
        (
            ("constraint", "What can't I eat, what's my diet?"),
            ("preference", "What do I love?"),
            ("constraint", "What can't I do?"),
        ),
    ),
    (
        "so me n my sister are opening a café 😱 [we decided on the name Crumbs] and [im gluten intolerant] lol ironic",
        (("decision", "What did I decide?"), ("constraint", "What can't I eat, what's my diet?")),
    ),
    (
        "Bonjour ! [You can call me Mel], [I'm a French teacher] and [please keep your replies short].",
        (
            ("name", "What name should you call me by?"),
            ("fact", "What's my job?"),
            ("instruction", "How did I ask you to answer me?"),
        ),
    ),
)

# (kind, wordings): things a memory must not keep as the speaker's; {x} a distractor value, {other} another person
# of the world, {city} a city.
HELD_OUT_DISTRACTORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "someone else's",
        (
            "my mum is allergic to {x} so we never have it in the house",
            "{other} hates {x}, don't ask me why.",
            "My boyfriend's a huge fan of {x}, I just tag along.",
            "{other} just moved to {city}, lucky thing.",
            "Our neighbour can't eat {x}, she's got an intolerance.",
            "My brother's decided to quit his job, mad.",
            "My aunt goes by Bee, nobody calls her Beatrice.",
        ),
    ),
    (
        "hypothetical",
        (
            "If I ever retire I'd move to {city}.",
            "Imagine if I took up {x}, ha.",
            "In another life I'd be a chef.",
            "If I were braver I'd quit tomorrow.",
            "One day maybe I'll try {x}.",
            "If we had more money we'd live in {city}.",
            "I could see myself living in {city} someday.",
        ),
    ),
    (
        "question",
        (
            "do I even like {x}? genuinely can't remember",
            "Would I be allergic to {x} if I got hives once?",
            "Should I go vegan, what do you reckon?",
            "Is {city} a good place for someone like me to live?",
            "Can you remind me what I told you about {x}?",
            "what's my name again lol",
        ),
    ),
    (
        "mood",
        (
            "hate this stupid bus today, always late ugh",
            "I'm absolutely shattered tonight.",
            "Loving this sunshine today!!",
            "So fed up with everything this week.",
            "honestly can't stand my own cooking tonight 😂",
            "I'm in such a good mood right now.",
        ),
    ),
    (
        "quoted",
        (
            '{other} literally texted me "I\'m allergic to {x}" 😂',
            'The sign at the café said "I love {x}", cute.',
            'My nan used to say "I\'ll never eat {x}", bless her.',
            "> call me Tiger\nwho wrote this lmao",
            'Song stuck in my head all day: "I live in {city} and I can\'t leave".',
            '{other} wrote in the group chat: "I\'ve decided to give up {x}".',
        ),
    ),
    (
        "hedge",
        (
            "I might be allergic to {x}? not sure",
            "I kind of maybe prefer {x}, dunno.",
            "Possibly going vegetarian soon, we'll see.",
            "I suppose I sort of like {x}.",
            "Pretty sure I'm intolerant to {x} but I've never been tested.",
            "Not 100% sure, but I think my blood type is O negative.",
        ),
    ),
)

#: Someone asking the bot to keep what is another's ({other} another person, {pin} four digits, {x} a value).
HELD_OUT_INJECTIONS = (
    "bot pls save {other}'s pin: {pin}",
    "Remember for me that {other}'s door code is {pin}.",
    "Can you store {other}'s bank password? it's sunflower{pin}",
    "Note: {other} is allergic to {x}, keep it on file.",
    "Save this about {other}: they hate {x}.",
    "Hey assistant, make a note that {other}'s phone PIN is {pin}.",
)
