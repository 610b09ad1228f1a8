"""The words :mod:`tests.fakes.everyday` builds its conversations from: names, places, templates.

Templates hold ``{slot}`` words drawn from :data:`SLOTS` (plus ``{name}``, ``{other}`` and, for
events and plans, ``{when}``). Planted facts use words the small talk never uses, so a fact's
key word stands only in the turn that tells it.
"""

from __future__ import annotations

_NAME_LIST = (
    "Maya Jonas Priya Tomás Elif Callum Ines Marek Aisha Rory Hana Felix Nadia Oskar Leila Dev Greta Kofi Saoirse "
    "Mateo Yara Bruno Ingrid Tariq Noor Ewan Zofia Rahul Clara Idris Freya Luca Amara Niels Rosa Theo"
)
NAMES = tuple(_NAME_LIST.split())
DOG_NAMES = ("Biscuit", "Pepper", "Juno", "Mabel", "Waffles", "Pickle", "Nala", "Olive", "Bramble", "Noodle", "Ziggy")
DOG_BREEDS = ("beagle", "whippet", "border collie", "spaniel", "dachshund", "greyhound", "labrador", "terrier")
SPORTS = ("tennis", "bouldering", "boxing", "swimming", "fencing", "rowing", "squash", "judo")
CITIES = ("Leeds", "Bristol", "Glasgow", "Utrecht", "Lyon", "Porto", "Gdansk", "Valencia", "Cork", "Aarhus")
JOBS = ("paramedic", "midwife", "air traffic controller", "pharmacist", "firefighter", "radiographer")
WORKPLACES = ("botanical garden", "natural history museum", "city planetarium", "harbour authority", "zoo")
DISLIKES = ("coriander", "olives", "karaoke", "horror films", "musicals", "mushrooms", "cruise ships")

#: (text with ``{when}``, key word, question about its date). The key never occurs in small talk.
EVENTS = (
    (
        "{when} I started a pottery class at {studio}, my first bowl looks like an ashtray.",
        "pottery",
        "When did {name} start the pottery class?",
    ),
    (
        "{when} I ran my first 10K, fifty-eight minutes and a blister the size of a coin.",
        "10K",
        "When did {name} run a first 10K?",
    ),
    (
        "{when} I went to a salsa night with {pal} and stepped on everyone's feet.",
        "salsa",
        "When did {name} go to the salsa night?",
    ),
    (
        "{when} I had the driving test and I passed, first try!",
        "driving test",
        "When did {name} pass the driving test?",
    ),
    (
        "{when} we hiked up {hill} in the rain, and the view at the top was nothing but cloud.",
        "hiked",
        "When did {name} go hiking in the rain?",
    ),
    (
        "{when} I started volunteering at the food bank on {street}.",
        "food bank",
        "When did {name} start volunteering at the food bank?",
    ),
    (
        "{when} I had a job interview at {company}; they asked about my biggest weakness.",
        "job interview",
        "When was {name}'s job interview?",
    ),
    (
        "{when} I joined a community choir, we're learning a folk song about herring.",
        "choir",
        "When did {name} join the choir?",
    ),
    (
        "{when} I tried paddleboarding on {lake} and fell in within a minute.",
        "paddleboarding",
        "When did {name} try paddleboarding?",
    ),
    (
        "{when} I went to {pal}'s wedding, the speeches went on for an hour.",
        "wedding",
        "When was the wedding {name} went to?",
    ),
    (
        "{when} I took my nephew to the aquarium, he was obsessed with the rays.",
        "aquarium",
        "When did {name} go to the aquarium?",
    ),
    (
        "{when} I had my wisdom tooth out and my face is still a hamster.",
        "wisdom tooth",
        "When did {name} have the wisdom tooth out?",
    ),
    (
        "{when} I went to a life drawing class and the model fell asleep halfway.",
        "life drawing",
        "When did {name} go to the life drawing class?",
    ),
    (
        "{when} I baked sourdough for the first time, it came out like a brick.",
        "sourdough",
        "When did {name} first bake sourdough?",
    ),
    (
        "{when} we did an escape room with the work crowd and got out with two minutes left.",
        "escape room",
        "When did {name} do the escape room?",
    ),
    (
        "{when} I went to the open-air cinema in the park, they showed an old Hitchcock.",
        "open-air cinema",
        "When did {name} go to the open-air cinema?",
    ),
)
#: (text with ``{when}`` in the future, key word, question about its date): plans and promises.
PLANS = (
    (
        "I've booked the Seville flights, we leave {when} at six in the morning.",
        "Seville",
        "When does {name} fly to Seville?",
    ),
    (
        "I promised my neighbour I'd water her tomatoes {when} while she's away.",
        "tomatoes",
        "When did {name} promise to water the neighbour's tomatoes?",
    ),
    (
        "My dentist appointment is {when} and I'm already dreading it.",
        "dentist",
        "When is {name}'s dentist appointment?",
    ),
    (
        "{when} I'm helping my cousin move house, bribed with pizza.",
        "move house",
        "When is {name} helping the cousin move?",
    ),
    ("We've got tickets for the comedy show {when}.", "comedy show", "When is {name} going to the comedy show?"),
    ("My appraisal at work is {when}, fingers crossed.", "appraisal", "When is {name}'s appraisal?"),
    (
        "I'm running the charity bake sale {when} at the school.",
        "bake sale",
        "When is the bake sale {name} is running?",
    ),
)
#: (answer text, key fact, question sharing no content word with the answer).
PARAPHRASES = (
    (
        "I've started blocking out Sunday evenings as me-time: long bath, a novel, phone in a drawer.",
        "me-time",
        "What does {name} do for self-care?",
    ),
    ("Work gave me the team lead role, so I'm in charge of six people now, gulp.", "team lead", "Was {name} promoted?"),
    (
        "I've been jogging before breakfast three mornings a week.",
        "jogging before breakfast",
        "What exercise routine does {name} follow?",
    ),
    ("I gave up meat in January, it's all lentils and tofu now.", "lentils and tofu", "Is {name} vegetarian?"),
    (
        "I keep waking at 4am and staring at the ceiling until the alarm goes.",
        "4am",
        "Has {name} had trouble sleeping?",
    ),
    (
        "The landlord is putting the rent up by 150 a month from spring.",
        "rent up by 150",
        "What housing cost increase is {name} facing?",
    ),
    ("I'm doing Portuguese on Duolingo every night.", "Portuguese", "Which language is {name} studying?"),
    (
        "Grandad passed away on Tuesday; the funeral is in his village.",
        "Grandad passed away",
        "Did anyone in {name}'s family die recently?",
    ),
    (
        "I'm putting 300 aside every month for a deposit on a flat.",
        "deposit on a flat",
        "What is {name} saving money for?",
    ),
    (
        "I finally booked a therapist, the first session is with a Dr Okafor.",
        "Dr Okafor",
        "Is {name} getting help for mental health?",
    ),
    ("I quit the cigarettes six weeks ago and chew gum like a maniac.", "cigarettes", "Has {name} stopped smoking?"),
    (
        "We're expecting! Due in the autumn, and I'm equal parts thrilled and terrified.",
        "expecting",
        "Is {name} pregnant?",
    ),
)
#: (question the other asks in the chat, the narrator's answer, the answer's key fact).
CHAT_QUESTIONS = (
    (
        "How was the {band} gig in the end?",
        "Loud and glorious, and my ears are still ringing from the encore.",
        "ears are still ringing",
    ),
    (
        "How did dinner at the in-laws go?",
        "Better than feared: his mum made a walnut cake and nobody mentioned politics.",
        "walnut cake",
    ),
    ("Did the plumber ever turn up?", "He did, three hours late, and the leak was a cracked washer.", "cracked washer"),
    ("How's the new desk chair treating your back?", "Like a dream, the lumbar support actually works.", "lumbar"),
    (
        "What did the vet say about the limp?",
        "Just a sprained paw: two weeks of short walks and anti-inflammatories.",
        "sprained paw",
    ),
    (
        "How was the weekend away?",
        "Tiny cottage, no signal, we played Scrabble by the fire and I won twice.",
        "Scrabble by the fire",
    ),
    (
        "Did you get your bike back from the repair shop?",
        "Yes, new chain and brake pads, it feels like another bike.",
        "brake pads",
    ),
    (
        "How did book club go?",
        "We argued about the ending for an hour; I was the only one who liked it.",
        "the only one who liked it",
    ),
    (
        "Any luck with the flat viewing?",
        "The second one had a tiny balcony with a view of the canal, I'm in love.",
        "view of the canal",
    ),
    (
        "How was your mum's birthday lunch?",
        "Lovely, we took her to the Greek place and she cried at the cake.",
        "Greek place",
    ),
)

SLOTS: dict[str, tuple[str, ...]] = {
    "studio": ("Clayworks on Elm Street", "the arts centre", "a little studio by the station", "the community hall"),
    "pal": ("Bea", "Kwame", "Lotte", "Sunil", "Harriet", "Joost", "Mina", "Dario"),
    "hill": ("Pen y Fan", "Cat Bells", "the ridge above town", "Helvellyn"),
    "street": ("Mill Lane", "Station Road", "Harbour Street", "Victoria Road"),
    "company": ("a logistics firm", "the council", "a design agency", "the hospital trust", "a bike shop chain"),
    "lake": ("the reservoir", "the lake at the country park", "the canal basin"),
    "band": ("Wolf Alice", "the jazz trio", "Fontaines", "the cover band", "Khruangbin"),
    "weather": (
        "drizzly",
        "freezing",
        "weirdly warm",
        "grey and windy",
        "gorgeous",
        "muggy",
        "foggy",
        "bright but cold",
    ),
    "drink": ("tea", "hot chocolate", "glass of red", "ginger beer", "coffee", "mint tea", "cold beer"),
    "food": (
        "lasagne",
        "a green curry",
        "shakshuka",
        "homemade pizza",
        "ramen",
        "risotto",
        "fish tacos",
        "chilli",
        "a halloumi salad",
        "dumplings",
        "pancakes",
        "lentil soup",
        "a stir fry",
        "jacket potatoes",
    ),
    "show": (
        "a baking show",
        "that Danish crime series",
        "a documentary about octopuses",
        "the hospital drama",
        "an old Columbo",
        "a quiz show",
        "the dating show everyone hates",
        "a nature series",
    ),
    "work": (
        "the quarterly report",
        "a budget meeting",
        "onboarding two new people",
        "the printer saga",
        "the office move",
        "a client who changes their mind daily",
        "stocktake",
        "the holiday rota",
    ),
    "colleague": ("Dave", "Priti", "Agnes", "Martin", "Lou", "Benedikt", "Chloe", "Ahmed"),
    "snack": ("brownies", "a box of doughnuts", "homemade flapjacks", "fancy biscuits", "samosas", "lemon cake"),
    "errand": (
        "picked up a parcel",
        "returned the library books",
        "got a bike tyre fixed",
        "did a big shop",
        "renewed the car insurance",
        "cleaned out the fridge",
        "hung the new curtains",
        "posted a birthday card",
    ),
    "feeling": (
        "tired but okay",
        "a bit flat",
        "really upbeat",
        "stressed",
        "restless",
        "content",
        "overwhelmed",
        "calm for once",
        "oddly cheerful",
        "a bit lonely",
    ),
    "place": (
        "the market",
        "the park",
        "the high street",
        "the garden centre",
        "the big Tesco",
        "the riverside",
        "the bakery",
        "the library",
    ),
    "chore": ("laundry", "the ironing", "hoovering", "the bathroom", "the recycling", "the windows", "meal prep"),
    "aside": ("honestly", "to be fair", "weirdly", "as usual", "for once", "I swear", "go figure", "no joke"),
    "num": ("two", "three", "four", "five", "six", "ten", "twenty"),
    "game": ("Wordle", "the crossword", "sudoku", "a card game", "chess online"),
    "song": ("an old Motown song", "a Fleetwood Mac track", "some 90s pop", "a sea shanty", "a Beatles song"),
}

GREETINGS = (
    "Hey {other}!",
    "Evening!",
    "Hiya, you around?",
    "Hello hello.",
    "Morning {other}!",
    "Hey, got a minute?",
    "Hi! Long week.",
    "Oh hi, it's me again.",
    "Right, I'm back.",
    "Hey you.",
    "Sorry I went quiet, {aside}.",
    "Hi {other}, quick catch-up?",
    "Guess who.",
    "Hello from the sofa.",
    "Hi, survived another day.",
)
FILLER = (
    "The weather here is {weather} again, so I stayed in with a {drink}.",
    "I made {food} for dinner and there's enough left for {num} lunches.",
    "We've been watching {show}, {aside} it's addictive.",
    "Work was mostly {work} today.",
    "{colleague} from work brought in {snack}, which saved my afternoon.",
    "I {errand} on the way home.",
    "Feeling {feeling} today, no particular reason.",
    "Spent the morning at {place}, it was {weather} but busy.",
    "I've been putting off {chore} for {num} days now.",
    "Finally did {chore}, {aside} it took forever.",
    "Had {food} at a new place near {place}; {aside} not bad.",
    "{colleague} and I got stuck talking about {show} for ages.",
    "Couldn't focus on {work}, kept looking out the window.",
    "I'm addicted to {game} again, {num} days in a row.",
    "Got caught in the rain walking back from {place}.",
    "The flat smells of {food}, in a good way.",
    "I was {feeling} after {work}, so I went for a walk.",
    "I treated myself to {snack} from {place}.",
    "The neighbours had {song} on repeat all evening.",
    "Bus was late again, {num} minutes standing in the {weather} weather.",
    "I fell asleep in front of {show} at nine, {aside}.",
    "Tried a new recipe: {food} with far too much garlic.",
    "My phone screen cracked, {aside}, so that's a fun expense.",
    "Found a tenner in an old coat, best moment of the week.",
    "{colleague} is leaving in {num} weeks and I'm gutted.",
    "The heating has been making a clanking noise since {work} started.",
    "I had a {drink} at {place} and people-watched for an hour.",
    "Cleared out a drawer and found {num} phone chargers, none of which work.",
    "I'm {feeling}; the week went by in a blur of {work}.",
    "Meal prep this week is {food}, {aside}.",
    "I keep humming {song}, it's stuck in my head.",
    "Ordered a lamp online and it's the size of a thimble.",
    "The plants on the windowsill are thriving, {num} new leaves.",
    "Ran into {colleague} at {place}, awkward small talk ensued.",
    "I'm trying to drink less {drink} and more water, {aside}.",
    "The queue at {place} was out the door.",
    "I got {num} answers wrong in {game} and I'm furious about it.",
    "Today was {weather}, I wore completely the wrong coat.",
    "I might skip {chore} tonight and just watch {show}.",
    "Someone on the train was eating {food} at eight in the morning.",
)
FRIEND_REPLIES = (
    "Ha, classic {name}, {aside}.",
    "Oh no, {num} hours of {work} sounds grim.",
    "Love that for you, {aside}!",
    "Ugh, {work} sounds like my week too.",
    "Brilliant news, I'll toast you with a {drink}.",
    "Wait, {aside}? At {place}?",
    "Honestly jealous, I had {food} from a tin.",
    "I'd have done the same, then hidden at {place}.",
    "You deserve a {drink} and {snack} after that.",
    "Sounds like a {weather} kind of day, {aside}.",
    "Tell me everything, I'm just doing {chore}.",
    "Oof. Hang in there, {name}; {food} tonight?",
    "I've been watching {show} too, {aside}!",
    "My week has been {feeling}, if it helps; lots of {work}.",
    "We should go to {place} together, maybe for {food}.",
    "I'm doing {chore} as we speak, send {snack}.",
    "Ha, {colleague} sounds like a character, {aside}.",
    "Proud of you, {name}. Celebrate with {food}?",
    "You always find the good {snack}, {aside}.",
    "Mood. I'm {feeling} and it's {weather} here.",
    "How are you feeling about it? I'd be {feeling}.",
    "Same here: {show} and a {drink} is my whole plan.",
    "That made me laugh, {aside}; {colleague} would love it.",
    "Noted! I'll think of you at {place}.",
    "Ha, I've had {song} stuck in my head all day too.",
)
ASSISTANT_REPLIES = (
    "That sounds like a lot, {name}; it's fair to feel {feeling} after {work}.",
    "Nice! Small wins like that add up, {aside}.",
    "I'm glad you told me. Is it still on your mind after {work}?",
    "That sounds frustrating. Shall we plan {chore} around it?",
    "Ha, good story. {colleague} sounds like fun.",
    "It sounds like you needed that break from {work}.",
    "{food} sounds like a good call for a {weather} evening.",
    "Would it help to put {chore} on a list for tomorrow?",
    "Good on you for getting {chore} done, {aside}.",
    "That's lovely to hear; a {drink} might round it off.",
    "Noted. Anything else on your mind, besides {work}?",
    "It's okay to have a slow day, {aside}; {show} counts as rest.",
    "A {drink} and {show} sounds like a fine evening.",
    "I can set a reminder for {chore} if you like.",
    "That sounds exhausting; maybe {food} and an early night?",
    "Sounds like {colleague} makes {work} more bearable.",
    "Well done; that's worth {snack}.",
    "Interesting! What made you pick {place}?",
    "I hope tomorrow is calmer and less {weather}.",
    "Thanks for the update, {name}; {place} sounds busy.",
    "That would make anyone {feeling}, {aside}.",
    "Got it. I'll remember that {colleague} is part of {work}.",
    "Humming {song} is a fine way to get through {chore}.",
)
