"""The words a statement about oneself is made of, as regular-expression parts: how a person says "I am", what they
may be (a job, a diet), what they may not eat, how a date or an answer's manner is put, and the small talk before;
and the words that unmake one (a hedge, someone else's words, the moment) or let a sentence be passed over (the
first words a statement opens with, the words a kind of statement needs).

:mod:`agent.compaction.self_statements` builds its patterns from these; they are kept apart so each list can grow
without the patterns around them growing harder to read. Each is a fragment to be compiled case-insensitively
unless it says otherwise.
"""

from __future__ import annotations

import re

from agent.dates import MONTHS, WEEKDAYS

__all__ = [
    "ADVERB",
    "ANSWERING",
    "CONSTRAINT_WORDS",
    "COUNT",
    "DATE",
    "DIETS",
    "ERRAND",
    "FACT_WORDS",
    "FOODS",
    "I_AM",
    "LANGUAGES",
    "MANNER",
    "MOMENT",
    "MONTH",
    "OCCUPATION",
    "OPENER",
    "QUALIFIER",
    "REACTION",
    "REFUSED",
    "STARTS",
    "SUBORDINATE",
    "TELLING",
    "TO_ME",
]

I_AM = r"(?:i'?m|i am)"
ADVERB = (
    r"(?:(?:really|also|actually|absolutely|definitely|strongly|generally|usually|much|totally|honestly|just|still"
    r"|seriously|truly|genuinely|always|do|very much|so) )?"
)
#: Words after a liking that make it a reaction to the moment or a person in the room ("I love you", "I like that").
REACTION = (
    r"(?!(?:you|u|ya|it|that|this|them|him|her|those|these|when|how|what|your|his|their|our|being|the (?:idea|sound"
    r"|look|way|fact|photo|pic|picture|video)|to (?:say|think|believe|admit|break|bother|ask|interrupt|hear))\b)"
)
OCCUPATION = (
    r"student|teacher|nurse|doctor|physician|surgeon|dentist|pharmacist|vet|veterinarian|engineer|developer"
    r"|programmer|designer|architect|lawyer|solicitor|barrister|accountant|chef|cook|baker|writer|author|journalist"
    r"|editor|artist|painter|musician|photographer|scientist|researcher|professor|lecturer|farmer|plumber"
    r"|electrician|carpenter|mechanic|pilot|firefighter|paramedic|police officer|soldier|librarian|barista"
    r"|waiter|waitress|bartender|cashier|manager|consultant|analyst|translator|therapist|psychologist"
    r"|social worker|midwife|physiotherapist|carer|caregiver|tutor|chemist|biologist|physicist|economist|banker"
    r"|entrepreneur|freelancer|pensioner|retiree|homemaker|mum|mom|dad|mother|father|parent|grandmother"
    r"|grandfather|grandma|grandpa"
)
FOODS = r"dairy|gluten|meat|pork|beef|fish|alcohol|sugar|caffeine|nuts|eggs|shellfish|lactose|wheat|soy|spicy food"
DIETS = (
    r"vegetarian|vegan|pescatarian|pescetarian|teetotal(?:l?er)?|coeliac|celiac|diabetic|lactose[- ]intolerant"
    r"|gluten[- ]intolerant|kosher|halal|sober|non-drinker|colou?r[- ]?blind|deaf|hard of hearing|dyslexic|autistic"
    r"|a wheelchair user"
)
MONTH = r"(?:" + "|".join(MONTHS) + r")"
DATE = r"(?:" + MONTH + r" \d{1,2}(?:st|nd|rd|th)?|\d{1,2}(?:st|nd|rd|th)? (?:of )?" + MONTH + r")"
COUNT = r"a|an|one|two|three|four|five|six|seven|\d{1,2}"
#: A word before "allergy" that says what of or how bad ("a bad nut allergy"), never whose or about what.
QUALIFIER = r"(?:(?!(?:no|any|about|for|of|with|the|my|your|his|her|their|this|that)\b)[\w-]+ )"

#: How an answer is to be: in a unit, a language, a format, a length ("in metric units", "without emojis").
MANNER = (
    r"(?:in (?:(?:short|brief|simple|plain|full) )?(?:metric(?: units)?|imperial(?: units)?|celsius|fahrenheit"
    r"|bullet points|bullets|plain text|plain english|markdown|short sentences|(?P<language>(?-i:[A-Z][a-z]+)))"
    r"|without (?:any )?(?:emojis?|jargon|markdown|formatting|bullet points)"
    r"|with (?:no|fewer|less|more) (?:emojis?|jargon|markdown|formatting|detail)"
    r"|(?:short|brief|concise|simple|formal|informal|casual|shorter|briefer)\b)"
)
#: Words of small talk a statement may follow ("Oh, and btw, I'm vegan"): stripped before the patterns are tried.
OPENER = re.compile(
    r"(?i)(?:(?:oh|ah|well|so|and|but|also|plus|btw|by the way|fyi|ok|okay|yeah|yes|yep|no|nope|honestly|actually"
    r"|just so you know|for the record|for context|for reference|for what it'?s worth|fwiw|heads[- ]up"
    r"|side note|quick note|note(?! that)|ps|hey|hi|hello|hiya|howdy|yo|hola|(?:good )?morning|(?:good )?evening"
    r"|(?:good )?afternoon|big news|(?:quick|small) (?:thing|favou?r|update)|sorry|sure|right|anyway|anyways"
    r"|sounds good"
    r"|good question|no worries|fair enough|got it|thanks|thank you|cheers|great|cool|nice|perfect"
    r"|one more thing|fun fact|random fact|little[- ]known fact|full disclosure|to be clear)\b[\s,:;.!\u2014\u2013-]*)+"
)
LANGUAGES = frozenset(
    re.findall(
        r"\S+",
        """English Spanish French German Italian Portuguese Dutch Polish Russian Japanese Chinese Mandarin Cantonese
    Korean Arabic Hindi Turkish Greek Swedish Norwegian Danish Finnish Ukrainian Hebrew Celsius Fahrenheit British
    American Markdown""",
    )
)
#: What follows "I'm going to" in an errand or a forecast, not a decision ("… going to bed", "… going to regret it").
ERRAND = (
    r"(?!(?:bed|sleep|the|a|an|my|our|your|be|see|have|go|come|call|text|ping|let|get|regret|need|miss|fail|lose"
    r"|die|cry|love|hate|like|enjoy|forget|fall|win)\b)"
)
#: The words of which a constraint holds one: its diet, what it cannot have or do, what it reacts to.
CONSTRAINT_WORDS = " ".join(
    (
        "vegetarian vegan pescatarian pescetarian teetotal teetotaler teetotaller coeliac celiac diabetic kosher halal",
        "sober non-drinker lactose-intolerant gluten-intolerant colour-blind color-blind colourblind colorblind deaf",
        "hard dyslexic autistic wheelchair",
        "allergic intolerant sensitive allergy allergies intolerance intolerances eat drink smoke drive tolerate",
        "digest have only exclusively allowed supposed permitted keep been go be touch do stopped given gave quit",
        "react carry need use makes make gives give here",
    )
)
#: The words of which a fact about the speaker holds one: where they are from, their work, family and status.
FACT_WORDS = " ".join(
    (
        "from born grew moved relocated work working employed job role position career shifts nights living called",
        "named have got married single divorced widowed engaged retired pregnant unemployed self-employed",
        "left-handed",
        *(job.split()[-1] for job in OCCUPATION.split("|")),
    )
)
#: A sentence that supposes, hedges, asks, jokes, reports someone's words or names a secret: never an entry.
REFUSED = re.compile(
    r"(?i)\b(?:if(?! you\b| (?:that|it)'?s (?:ok|okay|alright|all right|fine)\b)|unless|might|maybe|perhaps|probably"
    r"|possibly|i guess|i think|i suppose|i believe|i reckon|i feel like|not sure|unsure|wonder(?:ing)?"
    r"|would(?! (?:rather|prefer|like you)\b)|could|hope|hoping|wish(?! me luck| you)"
    r"|i'll|i will|gonna|going to|thinking (?:of|about)|considering|kinda|kind of|sort of|sometimes|someday"
    r"|jk|just kidding|joking|kidding|pretend|imagine|suppose|supposedly|apparently|in case"
    r"|said|says|told|tells|asked|asks|wrote|writes|mentioned|mentions|claims?|claimed|reckons|according to"
    r"|quot(?:e|ed|ing)|texted|messaged"
    r"|passwords?|passcode|passphrase|pin|ssn|social security|credit card|card number|cvv|api key|access token"
    r"|secret|iban|account number|sort code|seed phrase|private key)\b|[\"\u201c\u201d\u00ab\u00bb]"
)
#: Words that tie a sentence to the moment ("I can't stand him tonight", "I'm not allowed to go out this week").
MOMENT = re.compile(
    r"(?i)\b(?:today|tonight|tomorrow|yesterday|right now|at the moment|atm|for now|this (?:morning|afternoon"
    r"|evening|week|weekend|month|time)|next (?:week|weekend|month|time)|last (?:night|week|weekend)"
    r"|(?:" + "|".join(WEEKDAYS) + r")s?)\b"
)
#: First words a statement can open with: a sentence starting with none of them is passed over before any pattern.
STARTS = frozenset(
    re.findall(
        r"\S+",
        """i i'm im i'd i've my our call everyone people friends always never from going in whenever don't dont do
    stop when we we'll we're we've let's lets remember keep bear note for can could would will everybody folks
    nothing please home home's give can't cant cannot reply respond answer write default decision moved relocated
    stick settled decided""",
    )
)
#: Words that make a sentence worth the patterns whatever its first word ("Dee is what everyone calls me").
TELLING = frozenset(
    re.findall(
        r"\S+",
        """call calls name's allergy allergic allergies intolerant intolerance makes make gives birthday settled
    moved move""",
    )
)
#: Words after which what follows is not said of the speaker as it stands ("when I'm tired", "than I like").
SUBORDINATE = re.compile(
    r"(?i)\b(?:when|whenever|while|until|than|that|whether|who|which|what|why|how|where|unless|knows?|thinks?"
    r"|believes?|heard|assumes?|forgot|forgets)\b"
)
#: What a standing instruction is about: how the bot answers this person.
ANSWERING = re.compile(
    r"(?i)\b(?:answers?|repl(?:y|ies)|respond|responses?|write|explain|summari[sz]e|translate|format(?:ting)?"
    r"|emojis?|units|metric|imperial|celsius|fahrenheit|jargon|markdown|bullet points?|spoilers|sources"
    r"|address me|call me (?:by )?(?-i:[A-Z]))\b"
)
#: What says an instruction is about the speaker's answers ("… with me", "… emojis").
TO_ME = re.compile(
    r"(?i)\b(?:me|my|answers|replies|responses|emojis?|units|metric|imperial|celsius|fahrenheit|jargon|markdown"
    r"|bullet points?|spoilers)\b"
)
