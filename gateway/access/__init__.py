"""Who may spend the owner's tokens: roles and the lists admins change (:mod:`.roles`), budgets (:mod:`.budgets`)."""
